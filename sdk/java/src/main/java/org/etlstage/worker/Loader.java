package org.etlstage.worker;

import java.util.List;

/** An L-worker: returning means the batch is durably loaded; only then is EOP written. */
@FunctionalInterface
public interface Loader extends Worker {
    void load(List<byte[]> messages) throws Exception;
}
