"""Load built variants through tvm-ffi and call them with checked tensors."""
