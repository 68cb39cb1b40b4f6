package org.etlstage.worker;

import java.sql.Connection;

/** Inserts a batch's rows on the connection, inside the transaction {@link SqlSink#commit} runs it in. */
@FunctionalInterface
public interface SqlInsert {
    void insert(Connection connection) throws Exception;
}
