"""What a run names and may need again: reference values (`contextfold._identifiers.values`), the
names code and customer-service runs use (`contextfold._identifiers.names`), and how salient each
one is (`contextfold._identifiers.salience`). Every scan here is linear in the text it reads."""
