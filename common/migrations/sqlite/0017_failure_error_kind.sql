-- The kind of what the client saw (stress_common::signature::ErrorKind, snake_case), as the
-- worker typed it; NULL for a record written before kinds were typed (judged from its text).
ALTER TABLE failures ADD COLUMN error_kind TEXT;
