// BulkLoad turns sorted rows into HFiles and loads them into their HBase tables, as HBase's
// own bulk load does (HFileOutputFormat2 and BulkLoadHFiles): the rows reach the regions as
// whole files, without the region servers' write path (no WAL, no memstore, no flushes).
// scripts/hbase-bulkload.sh compiles it against the classpath that runs HBase and runs it;
// zenhbase's bulk staging (zenhbase.Stage) writes its input.
//
//   BulkLoad ZK ZNODE FAMILY QUALIFIER DIR
//
// DIR holds each table's rows in files named TABLE.NNNNNN.rows (TABLE: the HBase table's name;
// NNNNNN from 000000 up, in key order), each a sequence of records sorted by row key, every key
// once: a 4-byte big-endian key length, the key, a 4-byte big-endian value length, the value
// (the cell's bytes, as the store writes them).
// Each table's rows become HFiles under DIR/hfiles/TABLE/FAMILY, one per region they
// fall in (a new file at each region's start key, and after about 1 GiB), every cell in
// FAMILY:QUALIFIER at the load's start time. Each HFile, once written, is synced to disk
// (bulk-loaded cells are in no WAL: a file the page cache still holds could be lost with the
// machine, and its writeback would stall the region servers' WAL syncs after the load), loaded
// into its region by BulkLoadHFiles, and removed; each rows file is removed once read. So the
// staging holds the rows and one HFile at most: on a local file system the region server copies
// a bulk-loaded file rather than moving it, and the HBase then holds the HFiles' size too.
// Prints one JSON line: {"tables":..,"rows":..,"hfiles":..,"bytes":..,"write_s":..,"load_s":..}.
import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.HConstants;
import org.apache.hadoop.hbase.KeyValue;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.RegionLocator;
import org.apache.hadoop.hbase.io.hfile.CacheConfig;
import org.apache.hadoop.hbase.io.hfile.HFileContext;
import org.apache.hadoop.hbase.io.hfile.HFileContextBuilder;
import org.apache.hadoop.hbase.regionserver.BloomType;
import org.apache.hadoop.hbase.regionserver.HStoreFile;
import org.apache.hadoop.hbase.regionserver.StoreFileWriter;
import org.apache.hadoop.hbase.tool.BulkLoadHFiles;
import org.apache.hadoop.hbase.util.Bytes;

public class BulkLoad {
  static final long ROLL_BYTES = 1L << 30;

  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: BulkLoad ZK ZNODE FAMILY QUALIFIER DIR");
      System.exit(2);
    }
    Configuration c = HBaseConfiguration.create();
    // host:port[,host:port...]: HBase takes the ports in the quorum itself.
    c.set(HConstants.ZOOKEEPER_QUORUM, args[0]);
    c.set(HConstants.ZOOKEEPER_ZNODE_PARENT, args[1]);
    // Every region may get one file per table; the default bound (32) is for MapReduce jobs.
    c.setInt("hbase.mapreduce.bulkload.max.hfiles.perRegion.perFamily", 4096);
    byte[] family = Bytes.toBytes(args[2]);
    byte[] qualifier = Bytes.toBytes(args[3]);
    File dir = new File(args[4]);
    File[] inputs = dir.listFiles((d, name) -> name.endsWith(".rows"));
    if (inputs == null) {
      throw new IOException("no directory " + dir);
    }
    for (File in : inputs) {
      if (!ROWS.matcher(in.getName()).matches()) {
        throw new IOException("rows file " + in + " is not named TABLE.NNNNNN.rows");
      }
    }
    Arrays.sort(inputs);
    // The tables, each with its files in order.
    java.util.Map<String, java.util.List<File>> tables = new java.util.TreeMap<>();
    for (File in : inputs) {
      java.util.regex.Matcher m = ROWS.matcher(in.getName());
      m.matches();
      tables.computeIfAbsent(m.group(1), k -> new java.util.ArrayList<>()).add(in);
    }
    FileSystem fs = FileSystem.getLocal(c);
    long ts = System.currentTimeMillis();
    long rows = 0, files = 0, bytes = 0, writeNs = 0, loadNs = 0;
    try (Connection conn = ConnectionFactory.createConnection(c)) {
      for (java.util.Map.Entry<String, java.util.List<File>> e : tables.entrySet()) {
        String name = e.getKey();
        TableName table = TableName.valueOf(name);
        Path out = new Path(new File(dir, "hfiles/" + name).getAbsolutePath());
        long t0 = System.nanoTime();
        byte[][] starts;
        try (RegionLocator loc = conn.getRegionLocator(table)) {
          starts = loc.getStartKeys();
        }
        Writer w = new Writer(c, fs, new Path(out, Bytes.toString(family)), family, qualifier, ts, starts,
            BulkLoadHFiles.create(c), table);
        for (File in : e.getValue()) {
          read(in, w);
          if (!in.delete()) {
            throw new IOException("cannot remove " + in);
          }
        }
        w.close();
        rows += w.rows;
        files += w.files;
        bytes += w.bytes;
        loadNs += w.loadNs;
        writeNs += System.nanoTime() - t0 - w.loadNs;
      }
    }
    System.out.printf("{\"tables\":%d,\"rows\":%d,\"hfiles\":%d,\"bytes\":%d,\"write_s\":%.3f,\"load_s\":%.3f}%n",
        tables.size(), rows, files, bytes, writeNs / 1e9, loadNs / 1e9);
  }

  // ROWS matches a rows file's name; group 1 is its table.
  static final java.util.regex.Pattern ROWS = java.util.regex.Pattern.compile("(.+)\\.[0-9]{6}\\.rows");

  // read appends the records of one rows file to w.
  static void read(File in, Writer w) throws IOException {
    try (DataInputStream r = new DataInputStream(new BufferedInputStream(new FileInputStream(in), 1 << 20))) {
      while (true) {
        int kl;
        try {
          kl = r.readInt();
        } catch (EOFException e) {
          return;
        }
        byte[] k = new byte[kl];
        r.readFully(k);
        byte[] v = new byte[r.readInt()];
        r.readFully(v);
        w.append(k, v);
      }
    }
  }

  // Writer writes sorted cells into HFiles, starting a new one at each region's start key and
  // after ROLL_BYTES, with the metadata HFileOutputFormat2 gives its files.
  static final class Writer {
    final Configuration c;
    final FileSystem fs;
    final Path dir;
    final byte[] family, qualifier;
    final long ts;
    final byte[][] starts;
    int region = -1; // index in starts of the region the open file's keys belong to
    StoreFileWriter cur;
    long curBytes;
    byte[] last;
    long rows, files, bytes;
    final BulkLoadHFiles loader;
    final TableName table;
    Path path; // of the open file
    long loadNs;

    Writer(Configuration c, FileSystem fs, Path dir, byte[] family, byte[] qualifier, long ts, byte[][] starts,
        BulkLoadHFiles loader, TableName table) {
      this.loader = loader;
      this.table = table;
      this.c = c;
      this.fs = fs;
      this.dir = dir;
      this.family = family;
      this.qualifier = qualifier;
      this.ts = ts;
      this.starts = starts;
    }

    void append(byte[] k, byte[] v) throws IOException {
      if (last != null && Bytes.compareTo(last, k) >= 0) {
        throw new IOException("rows not sorted, or a key twice: " + Bytes.toStringBinary(k) + " after " + Bytes.toStringBinary(last));
      }
      last = k;
      int reg = regionOf(k);
      if (cur == null || reg != region || curBytes >= ROLL_BYTES) {
        close();
        region = reg;
        HFileContext ctx = new HFileContextBuilder().withBlockSize(64 * 1024).build();
        path = new Path(dir, String.format("%06d", files));
        cur = new StoreFileWriter.Builder(c, new CacheConfig(c), fs)
            .withFilePath(path)
            .withFileContext(ctx).withBloomType(BloomType.ROW).build();
        files++;
      }
      KeyValue kv = new KeyValue(k, family, qualifier, ts, KeyValue.Type.Put, v);
      cur.append(kv);
      curBytes += kv.getLength();
      bytes += kv.getLength();
      rows++;
    }

    // regionOf is the index of the region holding k: the last start key at or before it.
    int regionOf(byte[] k) {
      int lo = 0, hi = starts.length - 1;
      while (lo < hi) {
        int mid = (lo + hi + 1) >>> 1;
        if (Bytes.compareTo(starts[mid], k) <= 0) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      return lo;
    }

    void close() throws IOException {
      if (cur == null) {
        return;
      }
      cur.appendFileInfo(HStoreFile.BULKLOAD_TIME_KEY, Bytes.toBytes(System.currentTimeMillis()));
      cur.appendFileInfo(HStoreFile.BULKLOAD_TASK_KEY, Bytes.toBytes("smartfeed-bulkload"));
      cur.appendFileInfo(HStoreFile.MAJOR_COMPACTION_KEY, Bytes.toBytes(true));
      cur.appendFileInfo(HStoreFile.EXCLUDE_FROM_MINOR_COMPACTION_KEY, Bytes.toBytes(false));
      cur.appendTrackedTimestampsToMetadata();
      cur.close();
      cur = null;
      curBytes = 0;
      try (FileChannel ch = FileChannel.open(java.nio.file.Paths.get(path.toUri().getPath()), StandardOpenOption.WRITE)) {
        ch.force(true);
      }
      long t0 = System.nanoTime();
      loader.bulkLoad(table, java.util.Map.of(family, java.util.List.of(path)));
      loadNs += System.nanoTime() - t0;
      fs.delete(path, false);
    }
  }
}
