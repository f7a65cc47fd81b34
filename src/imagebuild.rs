//! Builds format-correct component images (tarball plus IMGAPI manifest) for
//! tests, the simulator and benchmarks.
