"""Retrieval: exact search over a corpus of embeddings, and the measures BEIR and MTEB report."""
