"""Chat Completions' one home: its codec (``codec.py``: requests, answers, errors, usage, the
mediated turn), its live stream (``stream.py``), and its bodies and streams read into the
neutral shape and written from it for translation (``neutral.py``, ``neutral_stream.py``)."""
