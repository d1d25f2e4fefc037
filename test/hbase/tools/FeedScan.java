// FeedScan times HBase's own Java client making the reads a GetFeed makes of the materialized
// feed: one Scan of a row range, up to a page's rows, per read. scripts/hbase-scan.sh compiles
// it against the classpath that runs HBase and runs it; the bench gives it the serving phase's
// readers, in the order they were read, as row ranges (feedsvc.FeedRange).
//
//   FeedScan ZK ZNODE TABLE FAMILY RANGES_FILE LIMIT RATE THREADS WARMUP
//
// RANGES_FILE has one read per line: the start row and the stop row in hex, a space between.
// The first WARMUP reads are made and not timed (the JVM compiles the client's hot paths); then
// every line is read once more, offered at RATE a second (0: one after the other) with at most
// THREADS in flight, each timed from when it starts, as the bench times a GetFeed. Each Scan
// asks for at most LIMIT rows of FAMILY, LIMIT at a time (Scan.setLimit and setCaching: one
// RPC, closed by the server). Prints one JSON line, latencies in microseconds, with the fields
// of scripts/hbase-pe.sh's line.
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.HConstants;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.util.Bytes;

public class FeedScan {
  public static void main(String[] args) throws Exception {
    if (args.length != 9) {
      System.err.println("usage: FeedScan ZK ZNODE TABLE FAMILY RANGES_FILE LIMIT RATE THREADS WARMUP");
      System.exit(2);
    }
    String[] hp = args[0].split(":");
    Configuration c = HBaseConfiguration.create();
    c.set(HConstants.ZOOKEEPER_QUORUM, hp[0]);
    c.set(HConstants.ZOOKEEPER_CLIENT_PORT, hp[1]);
    c.set(HConstants.ZOOKEEPER_ZNODE_PARENT, args[1]);
    TableName table = TableName.valueOf(args[2]);
    byte[] family = Bytes.toBytes(args[3]);
    List<byte[][]> ranges = new ArrayList<>();
    for (String line : Files.readAllLines(Paths.get(args[4]))) {
      line = line.trim();
      if (line.isEmpty()) {
        continue;
      }
      String[] f = line.split(" ");
      if (f.length != 2) {
        throw new IllegalArgumentException("ranges file: want START STOP in hex, got " + line);
      }
      ranges.add(new byte[][] {Bytes.fromHex(f[0]), Bytes.fromHex(f[1])});
    }
    if (ranges.isEmpty()) {
      throw new IllegalArgumentException("ranges file " + args[4] + " has no read");
    }
    int limit = Integer.parseInt(args[5]);
    double rate = Double.parseDouble(args[6]);
    int threads = Integer.parseInt(args[7]);
    int warmup = Integer.parseInt(args[8]);
    try (Connection conn = ConnectionFactory.createConnection(c); Table t = conn.getTable(table)) {
      AtomicLong rows = new AtomicLong();
      for (int i = 0; i < warmup; i++) {
        byte[][] r = ranges.get(i % ranges.size());
        rows.addAndGet(scan(t, family, r[0], r[1], limit));
      }
      long[] took = new long[ranges.size()];
      Arrays.fill(took, -1);
      AtomicLong failed = new AtomicLong();
      ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, threads));
      Semaphore inFlight = new Semaphore(Math.max(1, threads));
      long start = System.nanoTime();
      for (int i = 0; i < ranges.size(); i++) {
        if (rate > 0) {
          long due = start + (long) (i / rate * 1e9);
          long wait = due - System.nanoTime();
          if (wait > 0) {
            TimeUnit.NANOSECONDS.sleep(wait);
          }
        }
        inFlight.acquire();
        final int k = i;
        pool.execute(() -> {
          try {
            long t0 = System.nanoTime();
            rows.addAndGet(scan(t, family, ranges.get(k)[0], ranges.get(k)[1], limit));
            took[k] = System.nanoTime() - t0;
          } catch (Exception e) {
            failed.incrementAndGet();
          } finally {
            inFlight.release();
          }
        });
      }
      pool.shutdown();
      pool.awaitTermination(10, TimeUnit.MINUTES);
      double secs = (System.nanoTime() - start) / 1e9;
      long[] ok = Arrays.stream(took).filter(x -> x >= 0).sorted().toArray();
      if (ok.length == 0) {
        throw new IllegalStateException("every read failed (" + failed.get() + ")");
      }
      double sum = 0;
      for (long x : ok) {
        sum += x;
      }
      System.out.printf(
          "{\"tool\":\"FeedScan\",\"pe_version\":\"\",\"client_version\":\"%s\",\"command\":\"feedScan\",\"clients\":%d,"
              + "\"rows\":%d,\"warmup\":%d,\"value_size\":0,\"table\":\"%s\",\"n\":%d,\"mean_us\":%.1f,\"min_us\":%.1f,"
              + "\"p50_us\":%.1f,\"p95_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f,\"ops_per_sec\":%.1f,"
              + "\"offered_per_sec\":%.1f,\"limit\":%d,\"failed\":%d,\"rows_read\":%d}%n",
          org.apache.hadoop.hbase.util.VersionInfo.getVersion(), threads, ranges.size(), warmup, args[2], ok.length,
          sum / ok.length / 1e3, ok[0] / 1e3, q(ok, 0.50), q(ok, 0.95), q(ok, 0.99), q(ok, 0.999),
          ok[ok.length - 1] / 1e3, ok.length / secs, rate, limit, failed.get(), rows.get());
    }
  }

  // scan reads up to limit rows of [start, stop) in one RPC and returns how many came.
  static long scan(Table t, byte[] family, byte[] start, byte[] stop, int limit) throws Exception {
    Scan s = new Scan().withStartRow(start).withStopRow(stop).addFamily(family).setLimit(limit).setCaching(limit);
    long n = 0;
    try (ResultScanner rs = t.getScanner(s)) {
      for (Result r : rs) {
        n++;
      }
    }
    return n;
  }

  // q is the nearest-rank quantile of sorted nanoseconds, in microseconds (bench.Quantile's).
  static double q(long[] sorted, double p) {
    int i = (int) (p * sorted.length + 0.999999) - 1;
    return sorted[Math.min(Math.max(i, 0), sorted.length - 1)] / 1e3;
  }
}
