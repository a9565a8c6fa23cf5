/* Extended payloads (NVTX payload extension) through the real NVTX API: a nested schema,
 * a schema with int/float/string/array/enum/nested fields, ranges and marks carrying
 * payloads, a malformed schema, an unregistered schema id, a payload larger than the
 * recorder's cap, and two payloads on one event. Values checked by
 * tests/test_payload_ext.py. */
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtPayload.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  int32_t x;
  double y;
} Inner;

typedef struct {
  int32_t i32;
  uint64_t u64;
  int8_t i8;
  float f;
  double d;
  char fixed[12];
  const char* text;
  Inner inner;
  uint16_t arr[3];
  int32_t color;
} Outer;

static const nvtxPayloadSchemaEntry_t inner_entries[] = {
    {0, NVTX_PAYLOAD_ENTRY_TYPE_INT32, "x", NULL, 0, 0, NULL, NULL},
    {0, NVTX_PAYLOAD_ENTRY_TYPE_DOUBLE, "y", NULL, 0, 0, NULL, NULL},
};

static void mark_with(nvtxDomainHandle_t d, const char* msg, nvtxPayloadData_t* pd, int count) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof(a));
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = msg;
  NVTX_PAYLOAD_EVTATTR_SET_MULTIPLE_N(a, pd, count);
  nvtxDomainMarkEx(d, &a);
}

static nvtxDomainHandle_t g_domain;
static nvtxPayloadData_t g_thread_payload;

/* Another thread uses a schema the main thread registered (its definition sits in the
 * main thread's chunk). */
static void* other_thread(void* arg) {
  (void)arg;
  mark_with(g_domain, "thread mark", &g_thread_payload, 1);
  return NULL;
}

int main(void) {
  nvtxDomainHandle_t d = nvtxDomainCreateA("payloads");

  nvtxPayloadEnum_t colors[] = {{"red", 1, 0}, {"green", 2, 0}};
  nvtxPayloadEnumAttr_t ea;
  memset(&ea, 0, sizeof(ea));
  ea.fieldMask = NVTX_PAYLOAD_ENUM_ATTR_FIELD_NAME | NVTX_PAYLOAD_ENUM_ATTR_FIELD_ENTRIES |
                 NVTX_PAYLOAD_ENUM_ATTR_FIELD_NUM_ENTRIES | NVTX_PAYLOAD_ENUM_ATTR_FIELD_SIZE;
  ea.name = "Color";
  ea.entries = colors;
  ea.numEntries = 2;
  ea.sizeOfEnum = 4;
  uint64_t color_id = nvtxPayloadEnumRegister(d, &ea);

  nvtxPayloadSchemaAttr_t ia;
  memset(&ia, 0, sizeof(ia));
  ia.fieldMask = NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_NAME | NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_TYPE |
                 NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_ENTRIES | NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_NUM_ENTRIES |
                 NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_SCHEMA_ID;
  ia.name = "Inner";
  ia.type = NVTX_PAYLOAD_SCHEMA_TYPE_STATIC;
  ia.entries = inner_entries;
  ia.numEntries = 2;
  ia.schemaId = NVTX_PAYLOAD_SCHEMA_ID_STATIC_START + 1;
  uint64_t inner_id = nvtxPayloadSchemaRegister(d, &ia);

  /* Offsets left implicit (0) except where given: the recorder computes the layout. */
  nvtxPayloadSchemaEntry_t outer_entries[] = {
      {0, NVTX_PAYLOAD_ENTRY_TYPE_INT32, "i32", NULL, 0, 0, NULL, NULL},
      {0, NVTX_PAYLOAD_ENTRY_TYPE_UINT64, "u64", NULL, 0, 0, NULL, NULL},
      {0, NVTX_PAYLOAD_ENTRY_TYPE_INT8, "i8", NULL, 0, 0, NULL, NULL},
      {0, NVTX_PAYLOAD_ENTRY_TYPE_FLOAT, "f", NULL, 0, 0, NULL, NULL},
      {0, NVTX_PAYLOAD_ENTRY_TYPE_DOUBLE, "d", NULL, 0, 0, NULL, NULL},
      {0, NVTX_PAYLOAD_ENTRY_TYPE_CSTRING, "fixed", NULL, 12, 0, NULL, NULL},
      {0, NVTX_PAYLOAD_ENTRY_TYPE_CSTRING_UTF8, "text", NULL, 0, 0, NULL, NULL},
      {0, inner_id, "inner", NULL, 0, 0, NULL, NULL},
      {NVTX_PAYLOAD_ENTRY_FLAG_ARRAY_FIXED_SIZE, NVTX_PAYLOAD_ENTRY_TYPE_UINT16, "arr", NULL, 3, 0, NULL, NULL},
      {0, color_id, "color", NULL, 0, offsetof(Outer, color), NULL, NULL},
  };
  nvtxPayloadSchemaAttr_t oa = ia;
  oa.name = "Outer";
  oa.entries = outer_entries;
  oa.numEntries = sizeof(outer_entries) / sizeof(outer_entries[0]);
  oa.fieldMask &= ~(uint64_t)NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_SCHEMA_ID; /* a tool-assigned id */
  uint64_t outer_id = nvtxPayloadSchemaRegister(d, &oa);

  /* Malformed: an entry type nobody knows, an offset far beyond the payload. */
  nvtxPayloadSchemaEntry_t bad_entries[] = {
      {0, 999, "mystery", NULL, 0, 0, NULL, NULL},
      {0, NVTX_PAYLOAD_ENTRY_TYPE_INT32, "far", NULL, 0, 1u << 20, NULL, NULL},
  };
  nvtxPayloadSchemaAttr_t ba = ia;
  ba.name = "Bad";
  ba.entries = bad_entries;
  ba.numEntries = 2;
  ba.schemaId = NVTX_PAYLOAD_SCHEMA_ID_STATIC_START + 2;
  uint64_t bad_id = nvtxPayloadSchemaRegister(d, &ba);

  Outer o;
  memset(&o, 0, sizeof(o));
  o.i32 = -42;
  o.u64 = 18446744073709551615ull;
  o.i8 = -7;
  o.f = 1.5f;
  o.d = 2.25;
  strcpy(o.fixed, "fixed\"str");
  o.text = "pointed \\ text";
  o.inner.x = 7;
  o.inner.y = -0.5;
  o.arr[0] = 1;
  o.arr[1] = 2;
  o.arr[2] = 65535;
  o.color = 2;

  nvtxPayloadData_t pd[2] = {{outer_id, sizeof(o), &o}, {inner_id, sizeof(Inner), &o.inner}};
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof(a));
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "push outer";
  NVTX_PAYLOAD_EVTATTR_SET_MULTIPLE_N(a, pd, 1);
  nvtxDomainRangePushEx(d, &a);
  nvtxDomainRangePop(d);

  a.message.ascii = "start inner";
  NVTX_PAYLOAD_EVTATTR_SET_MULTIPLE_N(a, &pd[1], 1);
  nvtxRangeId_t id = nvtxDomainRangeStartEx(d, &a);
  nvtxDomainRangeEnd(d, id);

  mark_with(d, "mark two", pd, 2);

  unsigned char blob[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  nvtxPayloadData_t unknown = {NVTX_PAYLOAD_SCHEMA_ID_STATIC_START + 99, sizeof(blob), blob};
  mark_with(d, "mark unknown", &unknown, 1);

  int32_t small = 5;
  nvtxPayloadData_t bad = {bad_id, sizeof(small), &small};
  mark_with(d, "mark bad", &bad, 1);

  static unsigned char big[10000];
  for (size_t i = 0; i < sizeof(big); ++i) big[i] = (unsigned char)i;
  nvtxPayloadData_t large = {NVTX_TYPE_PAYLOAD_SCHEMA_RAW, sizeof(big), big};
  mark_with(d, "mark large", &large, 1);

  Outer wild = o;
  wild.text = (const char*)(uintptr_t)0x10; /* a bad pointer: never dereferenced */
  nvtxPayloadData_t wpd = {outer_id, sizeof(wild), &wild};
  mark_with(d, "mark wild pointer", &wpd, 1);

  /* The extension's own calls: payloads without a message. */
  nvtxRangePushPayload(d, &pd[1], 1);
  nvtxRangePopPayload(d, NULL, 0);
  nvtxMarkPayload(d, pd, 1);

  g_domain = d;
  g_thread_payload = pd[0];
  pthread_t t;
  if (pthread_create(&t, NULL, other_thread, NULL) == 0) pthread_join(t, NULL);

  nvtxMarkA("plain mark");
  return 0;
}
