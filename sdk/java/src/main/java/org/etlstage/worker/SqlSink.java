package org.etlstage.worker;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * Commits each batch's rows and its id in one JDBC transaction: a batch whose id is
 * recorded is not loaded again (docs/writing-workers.md: idempotent loaders). Any JDBC
 * driver: the SDK depends on none.
 *
 * <p>The ids go into a table (default {@code etlstage_batches}, {@code id VARCHAR(64)
 * PRIMARY KEY}: MySQL keys no TEXT column), created when missing before the first commit
 * and outside its transaction, since MySQL commits a transaction at any CREATE TABLE.
 *
 * <p>Two loaders committing the same id at once do not both load it: the id's primary key
 * (or the database's locks) fails the second one's transaction, which rolls back; the id
 * then being recorded, {@link #commit} reports that batch skipped (false), as it would
 * have had the second loader come after the first.
 *
 * <p>One sink, one connection, one thread: the sink sets the connection's auto-commit off
 * for each commit and back as it was after.
 */
public final class SqlSink {
    private final Connection connection;
    private final String create;
    private final String lookup;
    private final String record;
    private boolean created;

    public SqlSink(Connection connection) {
        this(connection, "etlstage_batches");
    }

    public SqlSink(Connection connection, String table) {
        this(connection,
                "CREATE TABLE IF NOT EXISTS " + table + " (id VARCHAR(64) PRIMARY KEY)",
                "SELECT 1 FROM " + table + " WHERE id = ?",
                "INSERT INTO " + table + " (id) VALUES (?)");
    }

    /** The statements themselves: {@code create} null for none, the other two take the id as their one parameter. */
    public SqlSink(Connection connection, String create, String lookup, String record) {
        this.connection = connection;
        this.create = create;
        this.lookup = lookup;
        this.record = record;
    }

    public Connection connection() {
        return connection;
    }

    /** Whether the id is recorded. */
    public boolean committed(String batchId) throws SQLException {
        createTable();
        return recorded(batchId);
    }

    /**
     * Runs {@code insert} and records the id in one transaction, then commits it: true. When
     * the id is recorded already, nothing runs and nothing changes: false. What {@code
     * insert}, recording the id or the commit throws rolls everything back and is thrown
     * (unless the id turns out recorded by another loader meanwhile: false).
     */
    public boolean commit(String batchId, SqlInsert insert) throws Exception {
        if (batchId == null || batchId.isEmpty()) {
            throw new IllegalArgumentException("this loader commits each batch with its id, but the batch came without one: "
                    + "give the stage `batch_id: true` (L-stage, mode: batch) in stages.yaml");
        }
        createTable();
        boolean autoCommit = connection.getAutoCommit();
        connection.setAutoCommit(false);
        try {
            if (recorded(batchId)) {
                connection.rollback();
                return false;
            }
            insert.insert(connection);
            try (PreparedStatement st = connection.prepareStatement(record)) {
                st.setString(1, batchId);
                st.executeUpdate();
            }
            connection.commit();
            return true;
        } catch (Throwable failure) {
            try {
                connection.rollback();
                // A concurrent loader of the same batch committed first: its id's primary key
                // (or a lock) failed ours. The batch is loaded once, as if ours had come second.
                boolean loadedElsewhere = recorded(batchId);
                connection.rollback();
                if (loadedElsewhere) return false;
            } catch (SQLException again) {
                failure.addSuppressed(again);
            }
            throw failure;
        } finally {
            connection.setAutoCommit(autoCommit);
        }
    }

    private void createTable() throws SQLException {
        if (create == null || created) return;
        boolean autoCommit = connection.getAutoCommit();
        connection.setAutoCommit(true);
        try (Statement st = connection.createStatement()) {
            st.execute(create);
        } finally {
            connection.setAutoCommit(autoCommit);
        }
        created = true;
    }

    private boolean recorded(String batchId) throws SQLException {
        try (PreparedStatement st = connection.prepareStatement(lookup)) {
            st.setString(1, batchId);
            try (ResultSet rs = st.executeQuery()) {
                return rs.next();
            }
        }
    }
}
