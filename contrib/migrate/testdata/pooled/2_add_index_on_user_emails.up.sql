CREATE UNIQUE INDEX CONCURRENTLY users_email_index ON users (email);

-- golang-migrate's own example migration (database/pgx/examples/migrations/1285849751_add_index_on_user_emails.up.sql): one statement that cannot run in a transaction block.
