// Planted violation: the lower module includes the higher one.
#include "rtx/low/low.hpp"
#include "rtx/high/high.hpp"
