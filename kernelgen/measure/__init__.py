"""Test inputs, the reference math, byte-exact comparison and GPU timing."""
