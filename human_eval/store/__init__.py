"""Where ratings live: the SQL tables (``models``) and the engines and sessions (``db``)."""
