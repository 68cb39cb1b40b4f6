package org.etlstage.examples;

import java.io.ByteArrayOutputStream;
import java.io.FileOutputStream;
import java.util.List;
import org.etlstage.worker.Etlstage;
import org.etlstage.worker.Loader;
import org.etlstage.worker.Report;
import org.etlstage.worker.Scenario;

/**
 * A loader: appends each batch to a file (the first argument, or {@code loaded.txt} in
 * the stage's state folder), one message a line, and syncs it before acknowledging.
 */
public final class AppendLoader implements Loader {
    private final String path;
    private FileOutputStream file;
    private long loaded;

    AppendLoader(String path) {
        this.path = path;
    }

    @Override
    public void setup(Scenario sc) throws Exception {
        String dir = sc.stateDir().isEmpty() ? "." : sc.stateDir();
        file = new FileOutputStream(path != null ? path : dir + "/loaded.txt", true);
    }

    @Override
    public void load(List<byte[]> messages) throws Exception {
        ByteArrayOutputStream block = new ByteArrayOutputStream();
        for (byte[] m : messages) {
            block.write(m);
            block.write('\n');
        }
        file.write(block.toByteArray());
        file.getFD().sync();
        loaded += messages.size();
    }

    @Override
    public Report report() {
        return new Report().count("loaded", loaded);
    }

    @Override
    public void teardown() throws Exception {
        if (file != null) file.close();
    }

    public static void main(String[] args) {
        Etlstage.runLoader(new AppendLoader(args.length > 0 ? args[0] : null));
    }
}
