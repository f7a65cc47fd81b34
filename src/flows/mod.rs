//! Operator flows beyond update: setup, adoption, server delete and factory
//! reset cleanup, drift checks.
