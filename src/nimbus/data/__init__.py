"""Data plane: codec, shared-memory segments, Store, Channel, Buffer and Triggers."""
