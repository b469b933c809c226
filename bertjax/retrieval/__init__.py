"""`python -m bertjax.retrieval evaluate|sts`: scores an embedder (command.py says how).

A tool built on the library: the search and the measures it runs are
bertjax/search.py and bertjax/retrieval_metrics.py, which the retrieval task
(bertjax/tasks/retrieval.py) evaluates with too.
"""
