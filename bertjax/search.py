"""Exact search on the devices: each query's k passages of highest cosine similarity.

The corpus's vectors are split over every device of `mesh` (one device without one);
each batch of queries is scored against every shard at once, each shard keeps its own
top k, and the k best of those are the answer, so no device holds the corpus's whole
score matrix. Vectors are compared by cosine (normalized here), sentence-transformers'
default similarity; an embedder that normalizes ranks the same by dot product.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def top_k(
    queries: np.ndarray,
    passages: np.ndarray,
    k: int,
    *,
    mesh: jax.sharding.Mesh | None = None,
    query_batch: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """float [Nq, H] queries and [Np, H] passages -> (float32 scores, int32 passage
    indices), each [Nq, min(k, Np)], best first."""
    if len(passages) == 0:
        raise ValueError("an empty corpus")
    k = min(k, len(passages))
    devices = mesh.devices.size if mesh is not None else 1
    shard = -(-len(passages) // devices)  # passages a device holds
    padded = np.zeros((shard * devices, passages.shape[1]), np.float32)
    padded[: len(passages)] = unit(passages)
    valid = np.arange(len(padded)) < len(passages)
    if mesh is not None:
        spread = NamedSharding(mesh, P(mesh.axis_names))
        padded, valid = jax.device_put(padded, spread), jax.device_put(valid, spread)
    scores, indices = [], []
    for begin in range(0, len(queries), query_batch):
        chunk = np.zeros((query_batch, queries.shape[1]), np.float32)
        rows = unit(queries[begin : begin + query_batch])
        chunk[: len(rows)] = rows
        best, where = _search(chunk, padded, valid, k=k, shards=devices, per_shard=min(k, shard))
        scores.append(np.asarray(best)[: len(rows)])
        indices.append(np.asarray(where)[: len(rows)])
    if not scores:
        return np.zeros((0, k), np.float32), np.zeros((0, k), np.int32)
    return np.concatenate(scores), np.concatenate(indices)


@functools.partial(jax.jit, static_argnames=("k", "shards", "per_shard"))
def _search(queries, passages, valid, *, k: int, shards: int, per_shard: int):
    scores = jnp.where(valid[None, :], queries @ passages.T, -jnp.inf)
    rows = queries.shape[0]
    # Each shard's own best first, then the best of those.
    local, where = jax.lax.top_k(scores.reshape(rows, shards, -1), per_shard)
    where = where + (jnp.arange(shards) * (passages.shape[0] // shards))[None, :, None]
    best, pick = jax.lax.top_k(local.reshape(rows, -1), k)
    return best, jnp.take_along_axis(where.reshape(rows, -1), pick, axis=1).astype(jnp.int32)


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def ranked(
    query_ids: list[str],
    passage_ids: list[str],
    query_vectors: np.ndarray,
    passage_vectors: np.ndarray,
    depth: int,
    *,
    mesh: jax.sharding.Mesh | None = None,
) -> dict[str, dict[str, float]]:
    """A run, as retrieval_metrics.py reads it: {query id: {passage id: cosine}} of
    each query's `depth` best passages."""
    best, where = top_k(query_vectors, passage_vectors, depth, mesh=mesh)
    return {
        query: {passage_ids[i]: float(s) for s, i in zip(row_scores, row, strict=True)}
        for query, row_scores, row in zip(query_ids, best, where, strict=True)
    }
