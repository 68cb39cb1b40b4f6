package org.etlstage.examples;

import java.nio.file.Path;
import java.util.List;
import org.etlstage.worker.Etlstage;
import org.etlstage.worker.FileSink;
import org.etlstage.worker.Loader;
import org.etlstage.worker.Report;
import org.etlstage.worker.Scenario;

/**
 * An idempotent loader, for a stage with {@code mode: batch} and {@code batch_id: true}: each
 * batch becomes one file named after its id in a folder (the first argument, or
 * {@code sink-<instance>} in the stage's state folder), written, synced and renamed by
 * {@link FileSink} before the batch is acknowledged. A batch sent again after a crash keeps
 * its id, finds its file there and is not written twice. Reports {@code {"loaded": N, "output": DIR}}.
 */
public final class Sink implements Loader {
    private String dir;
    private FileSink files;
    private long loaded;

    Sink(String dir) {
        this.dir = dir;
    }

    @Override
    public void setup(Scenario sc) {
        if (dir == null) dir = Path.of(sc.stateDir(), "sink-" + sc.instance()).toString();
        files = new FileSink(Path.of(dir));
    }

    @Override
    public void load(List<byte[]> messages) throws Exception {
        loadBatch(null, messages); // no id: FileSink refuses the batch, naming the stage key
    }

    @Override
    public void loadBatch(String id, List<byte[]> messages) throws Exception {
        if (files.commit(id, messages)) loaded += messages.size(); // false: committed before, skipped
    }

    @Override
    public Report report() {
        return new Report().count("loaded", loaded).output(dir);
    }

    public static void main(String[] args) {
        Etlstage.runLoader(new Sink(args.length > 0 ? args[0] : null));
    }
}
