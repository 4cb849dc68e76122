"""An MkDocs hook for the API pages: the docstrings cross-reference in Sphinx's roles (``:func:`name```), which
Markdown does not know, so a page would show ":func:" before each name. The role goes; the name stays code."""

import re

ROLE = re.compile(r":(?:func|data|mod|class|meth|attr|exc|obj|const):(?=<code>)")


def on_page_content(html: str, **_: object) -> str:
    """The page's HTML without the role prefixes (mkdocs calls it for every page, after Markdown)."""
    return ROLE.sub("", html)
