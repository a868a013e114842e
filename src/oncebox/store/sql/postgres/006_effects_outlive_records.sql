-- Migration 6 (PostgreSQL): the triage ledger's rows are applied effects, which
-- outlive the dedup state retention drops; revised_at: when the current revision was
-- decided.
ALTER TABLE triage_ledger DROP CONSTRAINT triage_ledger_record_id_fkey;
ALTER TABLE records ADD COLUMN revised_at double precision;
