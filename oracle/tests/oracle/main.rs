//! The oracle's integration tests (the checker against QEMU's, the model's
//! rules and soundness), one module per subject, in one test binary.

mod check_support;

mod check_compressed;
mod check_data_file;
mod check_differential;
mod check_malformed;
mod check_property;
mod check_repair;
mod model_data;
mod model_fua;
mod model_rules;
mod model_soundness;
