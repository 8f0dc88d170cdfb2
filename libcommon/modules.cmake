# The module table of libcommon: the modules in layer order (each may include only modules
# listed before it) and, per module, the modules it includes. One source for three uses:
# libcommon/CMakeLists.txt, the layering test (cmake/RtxCheckLayers.cmake: every #include of
# libcommon/src and libcommon/include is checked against this table, which must be acyclic in
# this order) and docs/architecture.md's "Module layers" table (checked to be the same).
# Adding an include of another module: add it here first; an upward one is refused.
set(RTX_MODULES core kernels stats telemetry store io ir cli dist models geom rl privacy measure tune serve trace evolve app)
set(RTX_DEPS_core "")
set(RTX_DEPS_kernels core)
set(RTX_DEPS_stats core)
set(RTX_DEPS_telemetry core)
set(RTX_DEPS_store core)
set(RTX_DEPS_io core)
set(RTX_DEPS_ir core kernels stats telemetry io)
set(RTX_DEPS_cli core telemetry)
set(RTX_DEPS_dist core kernels telemetry)
set(RTX_DEPS_models core kernels telemetry io ir dist)
set(RTX_DEPS_measure core kernels stats telemetry store io ir cli dist models)
set(RTX_DEPS_geom core kernels telemetry io)
set(RTX_DEPS_rl core kernels stats telemetry io ir)
set(RTX_DEPS_privacy core kernels telemetry io ir)
set(RTX_DEPS_tune core kernels stats telemetry store io measure)
set(RTX_DEPS_serve core kernels stats telemetry io ir models measure tune)
set(RTX_DEPS_trace core telemetry io)
set(RTX_DEPS_evolve core kernels stats telemetry store io ir dist models measure tune serve)
set(RTX_DEPS_app core kernels stats telemetry store io ir cli dist models measure tune serve evolve)
