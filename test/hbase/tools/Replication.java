// Replication sets up HBase's own replication between two clusters of the tests (a primary and a
// standby), and checks that it carries rows. Compiled by scripts/hbase.sh against the same
// Maven-resolved classpath that runs HBase; no HBase shell (JRuby) is needed.
//
//   Replication peer  PRIMARY_ZK STANDBY_ZK [PEER_ID]   add (or keep) the serial peer primary → standby
//   Replication check PRIMARY_ZK STANDBY_ZK [SECONDS]   create a scope-1 table on both, put on the
//                                                        primary, wait for the row on the standby
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.HConstants;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;
import org.apache.hadoop.hbase.replication.ReplicationPeerConfig;
import org.apache.hadoop.hbase.util.Bytes;

public class Replication {
  static Configuration conf(String zk) {
    String[] hp = zk.split(":");
    Configuration c = HBaseConfiguration.create();
    c.set(HConstants.ZOOKEEPER_QUORUM, hp[0]);
    c.set(HConstants.ZOOKEEPER_CLIENT_PORT, hp[1]);
    c.setInt("hbase.client.retries.number", 5);
    return c;
  }

  static String clusterKey(String zk) { return zk + ":/hbase"; }

  public static void main(String[] args) throws Exception {
    if (args.length < 3) {
      System.err.println("usage: Replication peer|check PRIMARY_ZK STANDBY_ZK [PEER_ID|SECONDS]");
      System.exit(2);
    }
    switch (args[0]) {
      case "peer": peer(args[1], args[2], args.length > 3 ? args[3] : "standby"); break;
      case "check": check(args[1], args[2], args.length > 3 ? Integer.parseInt(args[3]) : 60); break;
      default: System.err.println("unknown verb " + args[0]); System.exit(2);
    }
  }

  // peer adds a serial peer: HBase then ships each region's edits in the order they were
  // written, also across a region server's crash. A plain peer does not: after a crash the dead
  // server's unshipped WAL is claimed and shipped independently of the new edits of its regions,
  // so a delete made after the restart can reach the standby before the put it deletes, and the
  // standby (NEW_VERSION_BEHAVIOR: a delete masks only what it saw before it) keeps the row.
  static void peer(String primary, String standby, String id) throws Exception {
    try (Connection c = ConnectionFactory.createConnection(conf(primary)); Admin a = c.getAdmin()) {
      var existing = a.listReplicationPeers().stream().filter(p -> p.getPeerId().equals(id)).findFirst();
      if (existing.isPresent()) {
        ReplicationPeerConfig pc = existing.get().getPeerConfig();
        if (!pc.isSerial()) {
          // The shell's set_peer_serial: the edits already queued keep their place.
          a.updateReplicationPeerConfig(id, ReplicationPeerConfig.newBuilder(pc).setSerial(true).build());
          System.out.println("peer " + id + " made serial");
          return;
        }
        System.out.println("peer " + id + " already present (serial)");
        return;
      }
      a.addReplicationPeer(id, ReplicationPeerConfig.newBuilder().setClusterKey(clusterKey(standby))
          .setSerial(true).build());
      System.out.println("serial peer " + id + " added: " + primary + " -> " + clusterKey(standby));
    }
  }

  static void createScoped(Admin a, TableName t) throws Exception {
    if (a.tableExists(t)) return;
    a.createTable(TableDescriptorBuilder.newBuilder(t)
        .setColumnFamily(ColumnFamilyDescriptorBuilder.newBuilder(Bytes.toBytes("f")).setScope(1).build())
        .build());
  }

  static void check(String primary, String standby, int secs) throws Exception {
    TableName t = TableName.valueOf("replication_check");
    try (Connection p = ConnectionFactory.createConnection(conf(primary));
        Connection s = ConnectionFactory.createConnection(conf(standby));
        Admin pa = p.getAdmin(); Admin sa = s.getAdmin()) {
      createScoped(sa, t);
      createScoped(pa, t);
      byte[] row = Bytes.toBytes("row-" + System.nanoTime());
      long t0 = System.nanoTime();
      try (Table pt = p.getTable(t)) {
        pt.put(new Put(row).addColumn(Bytes.toBytes("f"), Bytes.toBytes("q"), Bytes.toBytes("v")));
      }
      try (Table st = s.getTable(t)) {
        long deadline = t0 + TimeUnit.SECONDS.toNanos(secs);
        while (System.nanoTime() < deadline) {
          Result r = st.get(new Get(row));
          if (!r.isEmpty()) {
            System.out.printf("replicated in %.0f ms%n", (System.nanoTime() - t0) / 1e6);
            return;
          }
          Thread.sleep(20);
        }
      }
      System.out.println("NOT replicated within " + secs + " s");
      System.exit(1);
    }
  }
}
