"""Choosing excerpts: the strategies (ExcerptConfig), the loudest search and the corpus-index plan."""
