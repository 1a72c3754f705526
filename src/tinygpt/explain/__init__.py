"""Looking inside a checkpoint: every view is computed by the model's own forward pass.

report.py       `tinygpt inspect`: config, vocabulary, parameters per module, training record
trace.py        one prompt's trip through the model, every intermediate kept
heatmap.py      attention weights as terminal heatmaps; the next-character table
lens.py         the logit lens: what each layer already predicts
roles.py        the roles a head can play, one record each (name, threshold, words, score)
ablate.py       switching heads off (zero, or the head's mean output), for importance and the page
validation.py   the validation split a checkpoint was trained beside, checked to be its text
heads.py        `inspect --heads`: every head's role scores, entropy and importance
heads_cache.py  the head scores kept beside the checkpoint, keyed by its weights, text and settings
inspected.py    a checkpoint being looked at: its corpus, head scores and mean outputs, read once
describe.py     every head in words: where it looks, at what, its entropy
dictionary.py   a TopK sparse autoencoder of a layer's activations (a dictionary of features), its training
explanations.py any unit (neuron, feature) in words, from where it fires in the text; its top contexts
features.py     `tinygpt features`: a dictionary trained on a hook point's activations, and its step-0 control
feature_quality.py  a dictionary on validation text: L0, explained variance, the loss with it spliced in
feature_notes.py    each feature described: density, histogram, contexts, promoted characters, descriptions
feature_text.py     a feature file as text: the quality table, the features listed, one feature in detail
steering.py     a feature clamped to a value while the model runs, and its measured effect
circuits.py     `inspect --circuits`: how heads compose (Q, K, V) from the weights; knockouts
attribution.py  `inspect --attribution`: a logit split into what each head, MLP and embedding wrote
patching.py     `inspect --patch`: each activation taken from a clean run into a corrupted one, scored
neurons.py      `inspect --neurons`: every MLP neuron's density, contexts, direct effect, cost and words
timeline.py     `inspect --timeline`: each head's role at every evaluation; the recorder training is handed
walkthrough.py  `tinygpt explain`: one character through one head, every number printed
backward.py     `explain --backward`: the gradients back through that head, and one step
page.py         `tinygpt explain --html`: the self-contained page (with assets/)
page_sections.py    the page's neurons and features sections' data: the costliest neurons, the feature files
views.py        what the Python API returns: numbers, text for a terminal, HTML for a notebook
inline.py       the page's views in a notebook cell: the page in a frame, one section shown
pca.py          the 2-D map of the character embeddings
glyphs.py       how any character shows on a terminal
"""
