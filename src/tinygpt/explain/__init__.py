"""Looking inside a checkpoint: every view is computed by the model's own forward pass.

inspect.py      `tinygpt inspect`: config, vocabulary, parameters, record, heatmaps
trace.py        one prompt's trip through the model, every intermediate kept
heatmap.py      attention weights as terminal heatmaps; the next-character table
walkthrough.py  `tinygpt explain`: one character through one head, every number printed
page.py         `tinygpt explain --html`: the self-contained page (with assets/)
pca.py          the 2-D map of the character embeddings
glyphs.py       how any character shows on a terminal
"""
