"""Rebuild the embedded King James text from Debian's bible-kjv-text.

    python -m lgcli.datasets.make_kjv_mini   # needs `apt-get install bible-kjv-text`

Writes Genesis, Mark and John (`lgcli.text.KJV_MINI_BOOKS`), one verse per
line without headings or verse numbers (`lgcli.text.normalise_bible`), as
gzip with no name or time stamp in its header, so that rebuilding gives the
same bytes.
"""

import gzip

from lgcli.text import EMBEDDED_TEXT, KJV_MINI_BOOKS, bible_text


def main() -> None:
    text = bible_text(KJV_MINI_BOOKS)
    EMBEDDED_TEXT.parent.mkdir(parents=True, exist_ok=True)
    with open(EMBEDDED_TEXT, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                        compresslevel=9) as handle:
        handle.write(text.encode("utf-8"))


if __name__ == "__main__":
    main()
