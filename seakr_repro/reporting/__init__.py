"""Reporting: the published numbers as data and tables rendered side by side with ours."""
from .paper_numbers import available_tables, canonical, load_paper_table, paper_value
from .tables import save_table, side_by_side, to_latex, to_markdown

__all__ = ["available_tables", "canonical", "load_paper_table", "paper_value", "save_table",
           "side_by_side", "to_latex", "to_markdown"]
