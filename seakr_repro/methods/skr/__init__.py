"""SKR: self-knowledge elicitation (prompt, ICL, classifier, kNN) and its training labels."""
