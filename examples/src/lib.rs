//! Examples live in examples/examples/.
