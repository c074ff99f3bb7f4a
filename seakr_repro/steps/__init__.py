"""The notebook steps, one module each (prepare 00-01, extraction 02, estimators 03, tables
04-07 and 09, case studies 08, seed methods 10, mechanisms 11, render 90), the run grid under them
and the resumable runner."""
