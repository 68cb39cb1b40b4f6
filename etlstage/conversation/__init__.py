"""The rules of a conversation with a worker that every engine follows (:mod:`.policy`)."""
