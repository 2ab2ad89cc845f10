"""Formats of other tools: FlashInfer-Bench's Solution and Trace documents, and export."""
