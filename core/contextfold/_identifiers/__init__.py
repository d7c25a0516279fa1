"""What a run names and may need again: reference values (:mod:`.values`), the names code
and customer-service runs use (:mod:`.names`), and how salient each one is
(:mod:`.salience`). Every scan here is linear in the text it reads."""
