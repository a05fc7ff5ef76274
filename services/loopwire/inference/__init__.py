"""The inference service: engines (reference numpy Llama, simulated roofline, TensorRT-LLM),
their shared paged KV cache and continuous-batching scheduler, and the gRPC servicer.

Build one in-process with :func:`loopwire.inference.server.build_engine` and serve it with
:class:`loopwire.inference.service.InferenceServicer` (see ``server.py``).
"""
