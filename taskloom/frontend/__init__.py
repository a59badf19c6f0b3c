"""Frontends: models from other frameworks (PyTorch, ONNX) become taskloom graphs."""
