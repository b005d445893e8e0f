"""agentsim: discrete-event simulation of agentic LLM workloads against a tiered KV cache."""

__version__ = "0.1.0"
