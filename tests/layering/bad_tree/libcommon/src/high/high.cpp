// Allowed: the higher module includes the lower one.
#include "rtx/low/low.hpp"
