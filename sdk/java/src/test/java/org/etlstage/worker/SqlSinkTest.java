package org.etlstage.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** SqlSink on a real SQLite database: a batch's rows and its id commit together, once. */
class SqlSinkTest {
    static final String ID = "0123456789abcdef0123456789abcdef";
    static final String OTHER = "fedcba9876543210fedcba9876543210";

    @TempDir
    Path dir;

    final List<Connection> opened = new ArrayList<>();
    Connection db;

    Connection open() throws SQLException {
        Connection c = DriverManager.getConnection("jdbc:sqlite:" + dir.resolve("rows.db"));
        opened.add(c);
        try (Statement st = c.createStatement()) {
            st.execute("PRAGMA journal_mode=WAL");
            st.execute("PRAGMA busy_timeout=10000");
            st.execute("CREATE TABLE IF NOT EXISTS lines (line TEXT NOT NULL)");
        }
        return c;
    }

    @BeforeEach
    void setUp() throws SQLException {
        db = open();
    }

    @AfterEach
    void tearDown() throws SQLException {
        for (Connection c : opened) c.close();
    }

    static SqlInsert lines(String... lines) {
        return c -> {
            try (PreparedStatement st = c.prepareStatement("INSERT INTO lines (line) VALUES (?)")) {
                for (String l : lines) {
                    st.setString(1, l);
                    st.executeUpdate();
                }
            }
        };
    }

    List<String> column(String query) throws SQLException {
        List<String> got = new ArrayList<>();
        try (Statement st = db.createStatement(); ResultSet rs = st.executeQuery(query)) {
            while (rs.next()) got.add(rs.getString(1));
        }
        return got;
    }

    void expect(List<String> lines, List<String> ids) throws SQLException {
        assertEquals(lines, column("SELECT line FROM lines ORDER BY rowid"));
        assertEquals(ids, column("SELECT id FROM etlstage_batches ORDER BY id"));
    }

    @Test
    void aBatchIsLoadedOnceAFailedOneNotAtAll() throws Exception {
        SqlSink sink = new SqlSink(db);
        assertTrue(sink.commit(ID, lines("a", "b")));
        boolean[] ran = {false};
        assertFalse(sink.commit(ID, c -> ran[0] = true)); // sent again: skipped, its insert not run
        assertFalse(ran[0]);
        expect(List.of("a", "b"), List.of(ID));

        IllegalStateException boom = new IllegalStateException("boom");
        SqlInsert failing = c -> {
            lines("c").insert(c);
            throw boom;
        };
        assertSame(boom, assertThrows(IllegalStateException.class, () -> sink.commit(OTHER, failing)));
        expect(List.of("a", "b"), List.of(ID)); // neither its row nor its id

        assertTrue(sink.commit(OTHER, lines("c", "d"))); // after the failure, loaded whole
        expect(List.of("a", "b", "c", "d"), List.of(ID, OTHER));
        assertTrue(sink.committed(OTHER));
        assertTrue(db.getAutoCommit()); // as it was
    }

    @Test
    void withoutAnIdNothingIsLoaded() throws Exception {
        SqlSink sink = new SqlSink(db);
        assertThrows(IllegalArgumentException.class, () -> sink.commit("", lines("a")));
        assertEquals(List.of(), column("SELECT line FROM lines"));
    }

    @Test
    void theTableIsConfigurable() throws Exception {
        SqlSink sink = new SqlSink(db, "loaded_batches");
        assertTrue(sink.commit(ID, lines("a")));
        assertFalse(sink.commit(ID, lines("a")));
        assertEquals(List.of(ID), column("SELECT id FROM loaded_batches"));
    }

    /**
     * Under PostgreSQL's READ COMMITTED two loaders of one batch may both find its id absent:
     * the id's primary key still refuses the second. A lookup that never finds the id stands
     * for that race here: the second commit fails, its rows rolled back.
     */
    @Test
    void thePrimaryKeyRefusesASecondLoadTheLookupMissed() throws Exception {
        SqlSink plain = new SqlSink(db);
        assertFalse(plain.committed(ID)); // the default table made
        SqlSink blind = new SqlSink(db, null, "SELECT 1 FROM etlstage_batches WHERE id = ? AND 0",
                "INSERT INTO etlstage_batches (id) VALUES (?)");
        assertTrue(blind.commit(ID, lines("a")));
        assertThrows(SQLException.class, () -> blind.commit(ID, lines("a")));
        expect(List.of("a"), List.of(ID));
        assertFalse(plain.commit(ID, lines("a")));
    }

    /**
     * Two loaders (two connections) commit the same batch at once: both find its id absent,
     * the first commits, the second's transaction fails (SQLite: its snapshot is stale) and
     * rolls back, and it reports the batch skipped, since the id is recorded now.
     */
    @Test
    void twoLoadersOfOneBatchAtOnceLoadItOnce() throws Exception {
        SqlSink a = new SqlSink(db);
        SqlSink b = new SqlSink(open());
        assertFalse(b.committed(ID)); // the table is there before the race
        CountDownLatch aInserted = new CountDownLatch(1);
        CountDownLatch bLookedUp = new CountDownLatch(1);
        CountDownLatch aDone = new CountDownLatch(1);
        CompletableFuture<Boolean> first = CompletableFuture.supplyAsync(() -> {
            try {
                return a.commit(ID, c -> {
                    lines("a").insert(c);
                    aInserted.countDown();
                    assertTrue(bLookedUp.await(30, TimeUnit.SECONDS)); // b has found the id absent too
                });
            } catch (Exception e) {
                throw new RuntimeException(e);
            } finally {
                aDone.countDown();
            }
        });
        assertTrue(aInserted.await(30, TimeUnit.SECONDS));
        boolean second = b.commit(ID, c -> {
            bLookedUp.countDown();
            assertTrue(aDone.await(30, TimeUnit.SECONDS));
            lines("a").insert(c);
        });
        assertTrue(first.get(30, TimeUnit.SECONDS));
        assertFalse(second);
        expect(List.of("a"), List.of(ID));
    }

    /** Through the SDK's protocol loop: a batch sent again (to a new loader, as after a crash) is not loaded twice. */
    @Test
    void aLoaderCommittingThroughItLoadsABatchSentAgainOnce() throws Exception {
        Scenario sc = Scenario.fromEnv(Map.of("ETLSTAGE_TYPE", "L", "ETLSTAGE_MODE", "batch", "ETLSTAGE_BATCH_SIZE", "2",
                "ETLSTAGE_BATCH_ID", "1"));
        String first = "etlstage-batch-id " + ID + "\na\nb\n\u0017";
        String other = "etlstage-batch-id " + OTHER + "\nc\n\u0017";
        for (String in : List.of(first, first + other)) {
            SqlSink sink = new SqlSink(open());
            Loader rows = new Loader() {
                @Override
                public void load(List<byte[]> messages) {
                    throw new IllegalStateException("give the stage batch_id: true");
                }

                @Override
                public void loadBatch(String id, List<byte[]> messages) throws Exception {
                    sink.commit(id, c -> {
                        for (byte[] m : messages) lines(new String(m, StandardCharsets.UTF_8)).insert(c);
                    });
                }
            };
            Serve.loader(rows, sc, new ByteArrayInputStream(in.getBytes(StandardCharsets.ISO_8859_1)),
                    new ByteArrayOutputStream());
        }
        expect(List.of("a", "b", "c"), List.of(ID, OTHER));
    }
}
