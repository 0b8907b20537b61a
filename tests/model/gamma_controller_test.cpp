// The draft length: parsing --gamma, the expected-speedup rule, and how the
// adaptive controller follows the measured acceptance and cost.
#include "model/gamma_controller.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace specpipe {
namespace {

TEST(GammaController, ParsesFixedAndAuto) {
  EXPECT_EQ(parse_gamma("5").gamma, 5);
  EXPECT_FALSE(parse_gamma("5").adaptive);
  EXPECT_TRUE(parse_gamma("auto").adaptive);
  for (const char* bad : {"0", "17", "-1", "five", "", "4x"}) {
    try {
      parse_gamma(bad);
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--gamma:", 0), 0u) << e.what();
    }
  }
}

TEST(GammaController, ExpectedSpeedupFollowsTheClosedForm) {
  // (1 - a^(g+1)) / ((1 - a)(g c + 1)) at a = 0.8, g = 4, c = 0.25: 3.3616 / 2.
  EXPECT_NEAR(gamma_controller::expected_speedup(0.8, 4, 0.25), (1 - std::pow(0.8, 5)) / (0.2 * 2.0), 1e-12);
  EXPECT_NEAR(gamma_controller::expected_speedup(1.0, 4, 0.25), 5.0 / 2.0, 1e-12);  // all accepted
  EXPECT_NEAR(gamma_controller::expected_speedup(0.0, 3, 0.1), 1.0 / 1.3, 1e-12);   // one token per round
}

TEST(GammaController, BestGammaGrowsWithAcceptanceAndShrinksWithCost) {
  const int low = gamma_controller::best_gamma(0.5, 0.1, 1, 16);
  const int high = gamma_controller::best_gamma(0.95, 0.1, 1, 16);
  const int costly = gamma_controller::best_gamma(0.95, 0.6, 1, 16);
  EXPECT_LT(low, high);
  EXPECT_LT(costly, high);
  EXPECT_EQ(gamma_controller::best_gamma(0.99, 0.01, 1, 16), 16);  // capped
  EXPECT_EQ(gamma_controller::best_gamma(0.3, 1.5, 1, 16), 1);     // a draft as slow as the target: floor
  // Brute force agrees at a few points.
  for (const double a : {0.6, 0.8, 0.9})
    for (const double c : {0.05, 0.2, 0.4}) {
      const int g = gamma_controller::best_gamma(a, c, 1, 16);
      for (int h = 1; h <= 16; ++h)
        EXPECT_GE(gamma_controller::expected_speedup(a, g, c), gamma_controller::expected_speedup(a, h, c));
    }
}

TEST(GammaController, FixedGammaNeverMoves) {
  gamma_controller c(parse_gamma("6"));
  for (int i = 0; i < 50; ++i) c.observe(6, i % 2 ? 6 : 0, 0.001, 0.01);
  EXPECT_EQ(c.gamma(), 6);
}

TEST(GammaController, AutoFollowsTheMeasuredAcceptance) {
  gamma_controller c(parse_gamma("auto"));
  EXPECT_EQ(c.gamma(), 4);
  // Everything accepted, cheap drafts: gamma climbs.
  for (int i = 0; i < 40; ++i) c.observe(c.gamma(), c.gamma(), 0.001, 0.01);
  EXPECT_GT(c.acceptance(), 0.9);
  EXPECT_NEAR(c.cost_ratio(), 0.1, 1e-9);
  const int high = c.gamma();
  EXPECT_GE(high, 10);
  // Now the first draft is always rejected: gamma falls to the floor.
  for (int i = 0; i < 60; ++i) c.observe(c.gamma(), 0, 0.001, 0.01);
  EXPECT_LT(c.acceptance(), 0.15);  // the pseudo-counts keep it above 1/12
  EXPECT_EQ(c.gamma(), 1);
}

TEST(GammaController, AcceptanceIsTheGeometricRateOfTheRounds) {
  gamma_options o;
  o.smoothing = 0.0 + 1e-12;  // nearly no memory: the last round decides
  gamma_controller c(o);
  c.observe(5, 3, 0.001, 0.01);  // three kept, one rejection: (3 + 1) / (3 + 1 + 2)
  EXPECT_NEAR(c.acceptance(), 4.0 / 6.0, 1e-6);
  c.observe(5, 5, 0.001, 0.01);  // all five kept, no rejection
  EXPECT_NEAR(c.acceptance(), 6.0 / 7.0, 1e-6);
}

TEST(GammaController, AFixedCostRatioIgnoresTheClock) {
  gamma_options o = parse_gamma("auto");
  o.fixed_cost_ratio = 0.25;
  gamma_controller a(o), b(o);
  for (int i = 0; i < 20; ++i) {
    a.observe(a.gamma(), a.gamma() - 1, 0.001, 0.01);
    b.observe(b.gamma(), b.gamma() - 1, 0.5 * (i + 1), 0.001);  // wildly different timings
    EXPECT_EQ(a.gamma(), b.gamma()) << i;
  }
  EXPECT_EQ(a.cost_ratio(), 0.25);
}

TEST(GammaController, BadOptionsAreNamed) {
  gamma_options o;
  o.gamma = 0;
  EXPECT_THROW(gamma_controller{o}, std::invalid_argument);
  o.gamma = 4;
  o.smoothing = 1.0;
  EXPECT_THROW(gamma_controller{o}, std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
