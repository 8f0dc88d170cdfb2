# A two-module table for the layering test's own test: `high` may include `low`, not back.
set(RTX_MODULES low high)
set(RTX_DEPS_low "")
set(RTX_DEPS_high low)
