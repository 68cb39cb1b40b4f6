package org.etlstage.worker;

import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;

/**
 * Entry points for a worker program: the scenario from the environment, the process's
 * stdin and stdout, errors on stderr, the exit status (0 clean end, 1 the worker
 * failed, 2 bad run instruction, 3 protocol violation).
 */
public final class Etlstage {
    private Etlstage() {}

    public static void runExtractor(Extractor w) {
        run("extractor", 'E', w);
    }

    public static void runTransformer(Transformer w) {
        run("transformer", 'T', w);
    }

    /** A transformer that reads each batch in place ({@link BatchTransformer}). */
    public static void runBatchTransformer(BatchTransformer w) {
        run("transformer", 'B', w);
    }

    public static void runLoader(Loader w) {
        run("loader", 'L', w);
    }

    /** {@code how}: which of Serve's entry points (a switch, not lambdas: none is bootstrapped at start-up). */
    private static void run(String fallback, char how, Worker w) {
        String name = w.getClass().getSimpleName().isEmpty() ? fallback : w.getClass().getSimpleName();
        // the protocol's own stdout; System.out goes to stderr so a stray println cannot break the stream
        OutputStream out = new FileOutputStream(FileDescriptor.out);
        System.out.flush();
        System.setOut(System.err);
        int code = 0;
        try {
            Scenario sc = Scenario.fromEnv();
            InputStream in = new FileInputStream(FileDescriptor.in);
            switch (how) {
                case 'E' -> Serve.extractor((Extractor) w, sc, in, out);
                case 'T' -> Serve.transformer((Transformer) w, sc, in, out);
                case 'B' -> Serve.batchTransformer((BatchTransformer) w, sc, in, out);
                default -> Serve.loader((Loader) w, sc, in, out);
            }
        } catch (WorkerException e) {
            System.err.println(name + ": " + e.getMessage());
            if (e.getCause() != null) e.getCause().printStackTrace();
            code = e.exitCode();
        } catch (IOException e) {
            boolean pipe = String.valueOf(e.getMessage()).contains("Broken pipe");
            System.err.println(name + ": " + (pipe ? "the supervisor closed our stdout; stopping" : e));
            code = 1;
        } catch (RuntimeException e) {
            System.err.println(name + " failed: " + e);
            e.printStackTrace();
            code = 1;
        }
        System.exit(code);
    }
}
