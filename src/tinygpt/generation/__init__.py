"""Generation: a model and a prompt in, characters out. It takes a model; the model imports none of it.

kv_cache.py     each layer's keys and values so far, and the position they end at
fused_step.py   one new position through the model in the fewest calls (generation's cached step)
sampling.py     generate and stream: temperature, top-k, top-p, the refill at block_size
"""
