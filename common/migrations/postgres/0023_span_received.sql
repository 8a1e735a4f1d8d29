-- A traced request's answer as the kernel received it (stress_common::trace::ClientSpan::
-- received_ns): where the worker's client has it, the time the answer then waited for the
-- client is the client's, not the wire's. NULL where the client has no receive time.
ALTER TABLE client_spans ADD COLUMN received_ns BIGINT;
