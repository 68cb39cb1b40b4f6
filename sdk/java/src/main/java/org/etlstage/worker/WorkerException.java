package org.etlstage.worker;

/**
 * Why a worker stopped, with the exit status it ends with: 1 the worker's own code or
 * its pipes failed, 2 a bad run instruction (the {@code ETLSTAGE_*} environment), 3 a
 * protocol violation (in the supervisor's input, or a result holding a marker byte).
 */
public class WorkerException extends Exception {
    private static final long serialVersionUID = 1L;
    public static final int FAILED = 1;
    public static final int CONFIG = 2;
    public static final int PROTOCOL = 3;

    private final int exitCode;

    public WorkerException(int exitCode, String message) {
        super(message);
        this.exitCode = exitCode;
    }

    public int exitCode() {
        return exitCode;
    }

    static WorkerException config(String message) {
        return new WorkerException(CONFIG, "bad run instruction: " + message);
    }

    static WorkerException protocol(String message) {
        return new WorkerException(PROTOCOL, "protocol violation: " + message);
    }
}
