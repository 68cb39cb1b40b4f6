"""Before and around the JVM's start: jars from Maven Central, class data archives, the
Python Spark runs, workers shipped to executors, and the SparkSession itself."""
