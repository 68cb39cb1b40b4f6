package org.etlstage.worker;

import java.util.List;

/** A T-worker: results for a batch (a batch of one in single mode); zero, one or many each. */
@FunctionalInterface
public interface Transformer extends Worker {
    void process(List<byte[]> messages, Output out) throws Exception;
}
