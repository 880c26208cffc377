//! Test harness: starts real `shoal` processes on ephemeral loopback ports in temp dirs.
