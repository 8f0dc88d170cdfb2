// The measuring engine, all of it: packs, runner, host evidence, artifacts, compare.
#pragma once
#include "rtx/measure/compare.hpp"
