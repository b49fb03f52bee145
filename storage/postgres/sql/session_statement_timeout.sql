-- The first statement of each session whose url does not set
-- statement_timeout: a DBA's statement_timeout for mf's role would cut
-- short the statements after it, this session's settings among them, and
-- every store call of mf has its own deadline, which cancels its statement.
SET statement_timeout = 0
