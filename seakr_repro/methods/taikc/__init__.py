"""TAIKC: the tree of knowledge checks, its prompts and the KBAE adapter."""
