"""The gateway: stateful Converse streams in front of the inference replicas (DESIGN §5)."""
