from tinygpt import GPT, GPTConfig
from tinygpt.explain.report import describe
from tinygpt.files.checkpoint import FORMAT_VERSION, write_payload


def test_the_vocabulary_shows_letters_as_themselves_and_escapes_only_the_invisible(tmp_path):
    chars = ["\t", "\n", " ", "\\", "a", "ß", "ä", "\u0301", "€"]  # \u0301: a combining accent
    config = GPTConfig(vocab_size=len(chars), block_size=8, n_layer=1, n_head=2, n_embd=8)
    payload = {
        "format_version": FORMAT_VERSION,
        "model_config": vars(config),
        "model": GPT(config).state_dict(),
        "tokenizer": chars,
        "record": {"step": 3},
    }
    write_payload(payload, tmp_path / "m.pt")
    lines = describe(tmp_path / "m.pt").splitlines()
    at = lines.index("vocabulary: 9 characters")
    assert lines[at + 1] == "  \\t\\n \\\\aßä\\u0301€"
