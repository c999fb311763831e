// The doctor's judgement of nodes: the node latency rule (node_latency.h)
// and the ring exchange's separate baselines for links inside and between
// nodes (preflight.h), with planted times; the measurements themselves run
// across two network namespaces in tests/e2e/multinode_cluster.sh.
#include <gtest/gtest.h>

#include "doctor/analysis.h"
#include "doctor/node_latency.h"
#include "doctor/preflight.h"

namespace hpc::doctor {
namespace {

// One default Config: a temporary Config{} per call makes GCC 12 at -O3 warn
// (-Wmaybe-uninitialized, a false positive inside std::string).
const Config& default_config() {
  static const Config c;
  return c;
}

// Every direction between `nodes` nodes takes `base` seconds.
std::vector<NodeLink> mesh(int nodes, double base) {
  std::vector<NodeLink> links;
  for (int a = 0; a < nodes; ++a)
    for (int b = 0; b < nodes; ++b)
      if (a != b) links.push_back({a, b, base});
  return links;
}

void add(std::vector<NodeLink>& links, int src, int dst, double extra) {
  for (NodeLink& l : links)
    if (l.src == src && (dst < 0 || l.dst == dst)) l.one_way += extra;
}

std::vector<RankFacts> two_nodes() {
  std::vector<RankFacts> ranks(4);
  for (int r = 0; r < 4; ++r) {
    ranks[r].rank = r, ranks[r].world = 4, ranks[r].node = r / 2, ranks[r].num_nodes = 2;
    ranks[r].local_rank = r % 2, ranks[r].local_size = 2;
    ranks[r].host = r < 2 ? "node-a" : "node-b";
  }
  return ranks;
}

// The findings that mention `word`.
std::vector<std::string> about(const std::vector<Finding>& found, const std::string& word) {
  std::vector<std::string> out;
  for (const Finding& f : found)
    if (f.text.find(word) != std::string::npos) out.push_back(f.text);
  return out;
}

TEST(DoctorNodes, TwoNodesTheOneWhoseSendsAreLateIsNamed) {
  std::vector<NodeLink> links = mesh(2, 60e-6);
  add(links, 1, 0, 0.020);  // netem delay 20ms on node 1's side
  NodeSpot s = find_slow_node(links, 2);
  ASSERT_TRUE(s.found);
  EXPECT_EQ(s.node, 1);
  EXPECT_EQ(s.src, 1);
  EXPECT_EQ(s.dst, 0);
  EXPECT_NEAR(s.one_way, 0.02006, 1e-9);
  EXPECT_NEAR(s.reverse, 60e-6, 1e-12);

  Preflight pf;
  pf.ran = true, pf.ranks = 4, pf.nodes = 2, pf.node_links = links;
  // (The sparse facts also draw findings about InfiniBand and versions; only the slow ones count here.)
  std::vector<std::string> found = about(analyse(default_config(), LaunchFacts{}, two_nodes(), pf), "slow ");
  ASSERT_EQ(found.size(), 1u);
  for (const char* part :
       {"slow node: node 1 (node-b)", "arrive late", "20.06 ms one way", "--exclude=node-b"})
    EXPECT_NE(found[0].find(part), std::string::npos) << part << " not in: " << found[0];
}

TEST(DoctorNodes, SymmetricSlowPairOfTwoNodesIsALinkNotANode) {
  std::vector<NodeLink> links = mesh(2, 60e-6);
  add(links, 0, 1, 0.004);
  add(links, 1, 0, 0.004);  // 8 ms round trip, the same both ways: nobody to blame
  NodeSpot s = find_slow_node(links, 2);
  ASSERT_TRUE(s.found);
  EXPECT_EQ(s.node, -1);
  Preflight pf;
  pf.ran = true, pf.ranks = 4, pf.nodes = 2, pf.node_links = links;
  std::vector<std::string> found = about(analyse(default_config(), LaunchFacts{}, two_nodes(), pf), "slow ");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("slow link between node"), std::string::npos) << found[0];
}

TEST(DoctorNodes, FourNodesOneSlowBothWaysIsNamedByThePairsItIsIn) {
  std::vector<NodeLink> links = mesh(4, 50e-6);
  for (int other : {0, 1, 3}) {
    add(links, 2, other, 0.003);
    add(links, other, 2, 0.003);
  }
  NodeSpot s = find_slow_node(links, 4);
  ASSERT_TRUE(s.found);
  EXPECT_EQ(s.node, 2);
}

TEST(DoctorNodes, HealthyOrJitteryOrSkewedClocksAreNotOutliers) {
  EXPECT_FALSE(find_slow_node(mesh(2, 60e-6), 2).found);
  std::vector<NodeLink> links = mesh(3, 60e-6);
  add(links, 1, -1, 0.0009);  // 16× slower but under a millisecond: scheduling noise
  EXPECT_FALSE(find_slow_node(links, 3).found);
  // Clocks 0.8 ms apart: one way looks 0.86 ms, the other −0.74 ms; the round trip is what counts.
  links = mesh(2, 60e-6);
  add(links, 0, 1, 0.0008);
  add(links, 1, 0, -0.0008);
  EXPECT_FALSE(find_slow_node(links, 2).found);
  // One direction only measured: no judgement.
  EXPECT_FALSE(find_slow_node({{0, 1, 0.5}}, 2).found);
}

// Ring of 4 ranks on 2 nodes: links inside a node (shared memory) are far
// faster than links between them (the network); that alone is no outlier.
TEST(DoctorNodes, RingLinksBetweenNodesHaveTheirOwnBaseline) {
  const std::vector<int> node_of = {0, 0, 1, 1};
  std::vector<LinkTime> links;
  for (int r = 0; r < 4; ++r)
    for (int from : {(r + 3) % 4, (r + 1) % 4})
      links.push_back({from, r, node_of[from] == node_of[r] ? 0.002 : 0.040});
  EXPECT_FALSE(find_slow_spot(links, 4, node_of).found);
  EXPECT_TRUE(find_slow_spot(links, 4).found);  // without the mapping they look slow
  links[0].seconds = 0.200;                     // 3 -> 0, between nodes: 5× the others
  SlowSpot s = find_slow_spot(links, 4, node_of);
  ASSERT_TRUE(s.found);
  EXPECT_NEAR(s.typical, 0.040, 1e-12);
}

TEST(DoctorNodes, OpenMpiTcpInterfaceMustExistOnEveryNode) {
  auto run = [](const std::string& value) {
    std::vector<RankFacts> ranks = two_nodes();
    for (RankFacts& f : ranks) {
      f.interfaces = {"hpcnet0", "lo"};
      f.env = {{"OMPI_MCA_btl_tcp_if_include", value}};
    }
    LaunchFacts launch;
    launch.world = 4;
    return about(analyse(default_config(), launch, ranks, Preflight{}), "OMPI_MCA_btl_tcp_if_include");
  };
  std::vector<std::string> found = run("hpcnet0,eth7");
  ASSERT_EQ(found.size(), 2u);  // once per node
  EXPECT_NE(found[0].find("names eth7, which node-a does not have (it has: hpcnet0, lo)"), std::string::npos)
      << found[0];
  EXPECT_TRUE(run("hpcnet0").empty());
  EXPECT_TRUE(run("10.231.0.0/16").empty());  // subnets are not checked
}

}  // namespace
}  // namespace hpc::doctor
