"""SeaKR: the method, its search queries and its uncertainty scorer."""
